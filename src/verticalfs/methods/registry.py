"""The method registry under its public path: :mod:`verticalfs.method_registry` (which sits below
the federation, so that the core finds a method's party role without importing the methods)."""

from verticalfs.method_registry import (
    _COMMANDS,
    _METHODS,
    available,
    check_name,
    command,
    commands,
    create,
    get,
    names,
    party_role,
    party_roles,
    pipelines,
    register,
)

__all__ = ["_COMMANDS", "_METHODS", "available", "check_name", "command", "commands", "create", "get", "names",
           "party_role", "party_roles", "pipelines", "register"]
