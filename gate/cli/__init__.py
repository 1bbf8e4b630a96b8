"""The command line: parsing, one call per subcommand, exit codes."""
