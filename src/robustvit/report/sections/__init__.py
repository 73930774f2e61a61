"""Built-in report sections, one module per suite family (``register_section``); the section registries
import every module of this package before their first lookup."""
