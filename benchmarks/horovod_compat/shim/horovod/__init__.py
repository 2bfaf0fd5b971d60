# A re-exporting shim: `import horovod.tensorflow as hvd` gets tf_ps_ops (nothing else).
