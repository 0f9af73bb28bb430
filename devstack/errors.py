class StackError(Exception):
    """A component of the local stack could not be started, stopped or found."""


class SetupMissingError(StackError):
    """A part installed by `make setup` (jars, a JDK) is not there."""


class StartupTimeoutError(StackError):
    """A component was started but did not answer within its deadline."""
