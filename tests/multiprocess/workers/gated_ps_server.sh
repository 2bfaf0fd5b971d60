#!/bin/sh
# ps_server for tests whose TFPS_TIMEOUT is shorter than the workers take to import
# TensorFlow: a server (not the scheduler) starts only once the file $TFPS_TEST_GO exists,
# which the test makes when every worker is ready to call init(), so the rendezvous that
# TFPS_TIMEOUT bounds takes a second, not the import's 20 s.
case " $* " in
  *" --role server "*) while [ ! -e "$TFPS_TEST_GO" ]; do sleep 0.05; done ;;
esac
exec "$TFPS_TEST_PS_SERVER" "$@"
