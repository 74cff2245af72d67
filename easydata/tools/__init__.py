"""Commands on finished outputs: validate, inspect, stats, and the embedded sample job."""
