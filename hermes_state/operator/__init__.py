"""Operator commands over a whole store: doctor, salvage, recover, snapshots, schema repair,
export."""
