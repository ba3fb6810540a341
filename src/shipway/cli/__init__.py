"""The ``shipway`` command line: :mod:`.main` holds the group and the one list of commands,
:mod:`.common` what the commands share, and each command has a module of its own.

Nothing is imported here, so a command module never imports back from its package.
"""
