"""The app's executors: the one inventory, the demand (a pure function of a few facts) and
the reconciler that alone declares and releases executors. Part of the core's base, which
both wings (streaming and batch) use."""
