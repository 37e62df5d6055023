"""PyTorch re-implementations of the legacy Theano recurrent cells and encoders.

Pure torch + numpy: nothing here imports the rest of the project.
"""
