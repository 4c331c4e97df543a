"""A controller that shuts crown down twice (a pytest plugin and the program,
say): the second call returns at once, and the job still ends 0. Before, it
ran the shutdown again and MPI aborted the job for finalising twice."""

import crown

crown.init()  # workers serve here and exit when the controller is done
crown.shutdown(0)
crown.shutdown(0)
print("shut down twice", flush=True)
