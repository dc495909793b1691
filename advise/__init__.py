"""The advisors on top of the simulator and the prices: floor, organization, commitments, demand history."""
