pytest_plugins = ["tests.testenv.k8s"]
