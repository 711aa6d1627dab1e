"""Past one machine: evaluation engines (the --server dispatcher, Ray) behind one interface."""
