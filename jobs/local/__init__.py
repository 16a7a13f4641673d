"""What runs on one machine for trying and testing: embedded servers, the demo, the simulator."""
