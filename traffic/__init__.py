"""Protocol logic, pure: RoCEv2 frames, DCQCN, go-back-N, congestion control, PFC state, pacing, collectives."""
