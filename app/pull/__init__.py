"""``lnserve pull``: fetch a published checkpoint set and convert it into a model artifact in one step.

``catalog`` lists the published sets, ``download`` fetches one file (resume, retries, checksums),
``archive`` extracts named members from a zip, and ``install`` ties them to the converters.
"""
