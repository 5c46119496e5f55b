#!/bin/bash
# Verifier of the learning task: reward 1 when /app/solution.py contains the word MAGIC,
# 0.2 when the agent wrote a solution file without it, 0 when it wrote none.
mkdir -p /logs/verifier
if [ -f /app/solution.py ] && grep -q MAGIC /app/solution.py; then
  echo 1 > /logs/verifier/reward.txt
elif [ -f /app/solution.py ]; then
  echo 0.2 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
