"""Idle GPUs stop: a function that stops idle training jobs, stops notebooks over their session limit and scales
idle fleet groups to 0, each event published to a notification topic."""
