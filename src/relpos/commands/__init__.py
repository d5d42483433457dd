"""Subcommands of the ``relpos`` command line (see :mod:`relpos.cli`)."""
