"""The skip-thoughts evaluation protocols (``lnserve eval skip-thoughts``): the original scripts' data
readers, folds, classifiers and scoring, reproduced step by step on any model's sentence vectors.

Layers: ``datasets`` reads the distribution files; ``folds`` and ``linear`` / ``relatedness`` are the
protocol's pieces; ``protocols`` runs one task on an ``encoders.Encoder``; ``report`` prints the table.
scikit-learn, scipy and torch come with the ``lnserve[eval]`` extra.
"""
