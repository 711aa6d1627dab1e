def workload(a, b):
    while True:
        pass
