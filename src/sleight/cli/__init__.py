"""Command-line interface: ``sleight <command>``; each instrument registers its own subcommands.

The only layer that may import everything; each command parses its flags and calls a library function.
"""
