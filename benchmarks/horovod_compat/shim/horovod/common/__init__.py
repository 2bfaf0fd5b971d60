"""`horovod.common`, only as far as Horovod's Keras tests import it (`util`)."""
