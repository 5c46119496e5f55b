#!/bin/bash
# Oracle: write the rewarded word.
mkdir -p /app
echo "MAGIC = 1" > /app/solution.py
