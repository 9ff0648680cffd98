"""The ``navigator`` command line: one module per subcommand."""
