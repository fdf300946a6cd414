"""The deploy command's defaults, in a module of their own: the CLI names them in its help without
loading the deploy machinery (switch, gate, service), so every other command starts faster."""

PREFLIGHTS = ("tiny", "model", "none")
DEFAULT_PREFLIGHT = "tiny"
DEFAULT_PORT = 8080
GATE_TIMEOUT = 300.0
PORT_TIMEOUT = 30.0
DEFAULT_KEEP = 2                 # trash/ releases --retire keeps
