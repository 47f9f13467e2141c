//! nfx-accel (see DESIGN.md).
