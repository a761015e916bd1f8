"""The shared speculative decoding engine."""
