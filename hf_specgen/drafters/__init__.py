"""Proposers: turn the committed sequence into a block to verify."""
