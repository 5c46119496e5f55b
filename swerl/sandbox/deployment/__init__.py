"""Deployment side of the sandbox stage: the Docker engines of a fleet, their images (offline
base, task images and their cache), warm pools of started containers, placement of trials on
engines, disk bounds, and garbage collection of what dead runs left."""
