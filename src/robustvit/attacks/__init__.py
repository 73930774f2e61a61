"""Adversarial attacks: one per module on a shared base class, with a registry.

``create_attack(name, model, **kwargs)`` (snake_case names; the hyphenated ones are aliases),
``list_attacks(pattern)``, ``attack_options(name)``; every attack is called as ``attack(x, y) -> x_adv`` on
[0, 1] images. The registry imports every module of this package before its first lookup, so a new attack
module is picked up with no list to edit.
"""

from robustvit.attacks.base import Attack, attack_options, create_attack, list_attacks, register_attack

__all__ = ["Attack", "attack_options", "create_attack", "list_attacks", "register_attack"]
