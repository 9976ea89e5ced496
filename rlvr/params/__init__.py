"""params.yaml as typed sections: the model of every knob, its checks, profiles."""
