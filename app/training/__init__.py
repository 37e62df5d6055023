"""Training and fine-tuning of order-embedding encoders, and the synthetic world of the trained demo."""
