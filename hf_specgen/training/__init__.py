"""Offline data pipeline for the tiny-world models: corpus building and tokenizer training."""
