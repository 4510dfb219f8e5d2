"""What a cell trains, framework-neutral: the layer vocabulary, architectures and ImageNet backbones built from it, and each workload's canonical initial variables and FLOPs."""
