"""Command-line interface: ``sleight <command>``; each instrument registers its own subcommands."""
