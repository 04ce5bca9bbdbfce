module github.com/gpudiag/gpudiag/scripts/bench/syscallcost

go 1.26
