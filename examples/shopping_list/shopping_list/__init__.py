"""`shopping_list`, a GymBus environment: see environment.py."""
