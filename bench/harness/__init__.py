"""The bench harness: process control, wrk runs, and the report (bench/README.md)."""
