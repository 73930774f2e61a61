"""Adversarial attacks: one per module on a shared base class, with a registry.

``create_attack(name, model, **kwargs)`` (snake_case names; the hyphenated ones are aliases),
``list_attacks(pattern)``, ``attack_options(name)``; every attack is called as ``attack(x, y) -> x_adv`` on
[0, 1] images.
"""

from robustvit.attacks.base import Attack, attack_options, create_attack, list_attacks, register_attack

# Built-in attacks register themselves on import; each lives in its own module.
import importlib as _importlib
import pkgutil as _pkgutil

for _m in _pkgutil.iter_modules(__path__):
    if _m.name not in ("base",) and not _m.name.startswith("_"):
        _importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["Attack", "attack_options", "create_attack", "list_attacks", "register_attack"]
