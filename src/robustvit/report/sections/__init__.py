"""Built-in report sections, one module per suite family; importing this package registers them
(``register_section``)."""

import importlib as _importlib
import pkgutil as _pkgutil

for _m in _pkgutil.iter_modules(__path__):
    if not _m.name.startswith("_"):
        _importlib.import_module(f"{__name__}.{_m.name}")
