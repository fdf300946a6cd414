"""assemble: turn a pinned llama.cpp into a relocatable, verified GPU runtime."""

__version__ = "0.1.0"
