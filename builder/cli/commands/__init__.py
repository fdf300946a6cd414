"""One module per subcommand; see builder/cli.py."""
