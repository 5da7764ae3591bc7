#!/bin/sh
# Runs after every IPC test (ctest fixture cleanup): no shared-memory segment of ours may remain.
left=$(ls /dev/shm 2>/dev/null | grep "^specd-$(id -u)-" || true)
if [ -n "$left" ]; then
  echo "left in /dev/shm: $left"
  exit 1
fi
echo "/dev/shm holds nothing of ours"
