"""Deployment side of the sandbox stage: the Docker engines, their images and warm pools,
placement of trials on engines, and garbage collection."""
