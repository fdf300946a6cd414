"""assemble deploy: put a verified runtime in service on a host (env file + serve script + systemd unit),
gated on a real first request, with rollback. layout.py is the one home of the host tree's shape."""
