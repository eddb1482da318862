"""A module that computes for `busy_functions.BURN` seconds when imported (a heavy library)."""

from tests.integration.busy_functions import BURN, burn

burn(BURN)

REWARD = 1.0
