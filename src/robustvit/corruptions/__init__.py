"""robustvit.corruptions"""
