"""Running on a dask `distributed` cluster: Beam's DaskRunner with a complete batch translation, and its worker start-up."""
