"""`gym-runner secure init`: a nats-server configuration whose users are GymBus's roles,
and one credentials file per role (`_secure`); `_command` is the CLI."""

from ._secure import SecureLayout, secure_init

__all__ = ["SecureLayout", "secure_init"]
