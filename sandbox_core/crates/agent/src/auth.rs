//! Every call must carry the sandbox's token: `authorization: Bearer <token>`.

use tonic::{Request, Status};

#[derive(Clone)]
pub struct TokenCheck {
    expected: std::sync::Arc<Vec<u8>>,
}

impl TokenCheck {
    pub fn new(token: &str) -> Self {
        TokenCheck {
            expected: std::sync::Arc::new(format!("Bearer {token}").into_bytes()),
        }
    }

    pub fn check(&self, req: Request<()>) -> Result<Request<()>, Status> {
        match req.metadata().get("authorization") {
            Some(v) if constant_time_eq(v.as_bytes(), &self.expected) => Ok(req),
            Some(_) => Err(Status::unauthenticated("wrong sandbox token")),
            None => Err(Status::unauthenticated("missing sandbox token")),
        }
    }
}

/// Compares without an early exit so the time taken does not reveal how much of a guess matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | ((a.len() ^ b.len()) >> 8) as u8;
    for (i, &x) in b.iter().enumerate() {
        diff |= x ^ a.get(i).copied().unwrap_or(!x);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn compares_exactly() {
        assert!(constant_time_eq(b"Bearer abc", b"Bearer abc"));
        assert!(!constant_time_eq(b"Bearer abd", b"Bearer abc"));
        assert!(!constant_time_eq(b"Bearer ab", b"Bearer abc"));
        assert!(!constant_time_eq(b"Bearer abcd", b"Bearer abc"));
        assert!(!constant_time_eq(b"", b"Bearer abc"));
    }
}
