"""robustvit.analysis"""
