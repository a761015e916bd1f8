"""Hub model classes: each file imports only torch and transformers."""
