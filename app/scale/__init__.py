"""Scale-out on Ray Serve (``lnserve serve --ray``): the same FastAPI app in several replicas, galleries
sharded over shard deployments. Needs the optional extra: ``pip install 'lnserve[ray]'``.

``merge`` is pure (no Ray import); ``shards``, ``galleries``, ``deployment`` and ``launch`` import Ray.
"""
