use criterion::{Criterion, criterion_group, criterion_main};
fn b(c: &mut Criterion) {
    c.bench_function("noop", |b| b.iter(|| 1));
}
criterion_group!(benches, b);
criterion_main!(benches);
