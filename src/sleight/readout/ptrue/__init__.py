"""P(True): one registry of readouts of one prompt, the answers they read, and the estimators beside them."""
