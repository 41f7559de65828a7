"""The node tier: the image, run by the chart under a real kubelet beside a real DRA driver."""
