/*
 * comm_mpi.c - the MPI engine of the collective seam (comm.h), for CPU
 * ranks. Built with MPI where CMake finds it (TRAINYARD_HAVE_MPI);
 * otherwise nn_comm_mpi_create says the build has no MPI.
 */
#include "models/train/comm.h"

#if TRAINYARD_HAVE_MPI
#error "the MPI engine follows in the next commit"
#else

int nn_comm_mpi_available(void) { return 0; }

ty_status nn_comm_mpi_create(double timeout_s, nn_comm **out, ty_err *err)
{
    (void)timeout_s;
    *out = NULL;
    return ty_fail(err, TY_EDEVICE, NULL,
                   "this build of trainyard has no MPI engine (CMake found "
                   "no MPI C library: install libopenmpi-dev and rebuild)");
}

#endif
