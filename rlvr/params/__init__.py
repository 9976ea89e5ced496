"""params.yaml as typed sections: every knob with its rule and help, the schema, profiles."""
